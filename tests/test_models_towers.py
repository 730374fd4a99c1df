"""The pretrained towers load the right weights: ImageNet photos and sentence similarity."""

from __future__ import annotations

import copy
import pickle

import numpy as np
import pytest
import torch
from skimage import data

from medheb_app.evidence.study import EvidenceError
from medheb_app.models.towers import (
    IMAGE_DIM,
    TEXT_DIM,
    ImageTower,
    TextTower,
    map_state_dict_by_order,
    preprocess_images,
)

IMAGENET_CATS = {281, 282, 283, 284, 285}  # tabby, tiger cat, Persian, Siamese, Egyptian cat
IMAGENET_CUPS = {504, 967, 968}  # coffee mug, espresso, cup


@pytest.fixture(scope="module")
def image_tower() -> ImageTower:
    return ImageTower()


@pytest.fixture(scope="module")
def text_tower() -> TextTower:
    return TextTower()


def _top1(tower: ImageTower, image: np.ndarray) -> int:
    with torch.inference_mode():
        logits = tower.classify(preprocess_images([image.astype(np.float32) / 255.0]))
    return int(logits.argmax(-1).item())


def test_image_tower_classifies_imagenet_photos(image_tower: ImageTower) -> None:
    assert _top1(image_tower, data.chelsea()) in IMAGENET_CATS
    assert _top1(image_tower, data.coffee()) in IMAGENET_CUPS


def test_image_tower_features_shape(image_tower: ImageTower) -> None:
    greys = [np.random.default_rng(0).random((300, 250), dtype=np.float32), np.zeros((64, 64))]
    with torch.inference_mode():
        features = image_tower(preprocess_images(greys))
    assert features.shape == (2, IMAGE_DIM)
    assert features.dtype == torch.float32


def test_preprocess_greyscale_matches_repeated_rgb() -> None:
    grey = np.random.default_rng(1).random((40, 30), dtype=np.float32)
    rgb = np.repeat(grey[..., None], 3, axis=-1)
    assert torch.allclose(preprocess_images([grey]), preprocess_images([rgb]))
    assert preprocess_images([grey]).shape == (1, 3, 224, 224)


def test_preprocess_rejects_non_images() -> None:
    with pytest.raises(EvidenceError, match="greyscale or RGB"):
        preprocess_images([np.zeros((4, 4, 7), dtype=np.float32)])


def test_map_state_dict_by_order_checks_shapes() -> None:
    source = {"a": torch.zeros(2, 3), "b": torch.zeros(4)}
    assert list(map_state_dict_by_order(source, {"x": torch.ones(2, 3), "y": torch.ones(4)})) == [
        "x",
        "y",
    ]
    with pytest.raises(ValueError, match="Shape mismatch"):
        map_state_dict_by_order(source, {"x": torch.ones(3, 2), "y": torch.ones(4)})


def test_text_tower_similarity_sanity(text_tower: TextTower) -> None:
    with torch.inference_mode():
        vectors = text_tower.encode(
            ["pleural effusion", "fluid in the pleural space", "fractured rib"]
        )
    assert vectors.shape == (3, TEXT_DIM)
    assert torch.allclose(vectors.norm(dim=-1), torch.ones(3), atol=1e-5)
    similar = float(vectors[0] @ vectors[1])
    different = float(vectors[0] @ vectors[2])
    assert similar > different + 0.1


QUERIES = [
    "pneumonia",
    "atelectasis and no pleural effusion",
    "small left apical pneumothorax with an adjacent rib fracture and no effusion",
    "x",
]


def _module_vectors(tower: TextTower, texts: list[str]) -> torch.Tensor:
    tokens = tower.tokenize(texts)
    with torch.no_grad():  # autograd on: the module itself runs, never the graph
        return tower(tokens["input_ids"], tokens["attention_mask"])


def test_text_tower_inference_graph_gives_the_module_vectors() -> None:
    tower = TextTower()
    with torch.inference_mode():
        alone = torch.cat([tower.encode([text]) for text in QUERIES])
        batch = tower.encode(QUERIES)  # padded: the mask must be in the graph
        again = tower.encode(QUERIES)  # TorchScript's optimised runs after the first
    assert isinstance(tower._graph[1], torch.jit.ScriptModule)
    assert torch.equal(alone, torch.cat([_module_vectors(tower, [t]) for t in QUERIES]))
    assert torch.equal(batch, _module_vectors(tower, QUERIES))
    assert torch.equal(again, batch)
    assert not any(key.startswith("_graph") for key in tower.state_dict())


def test_text_tower_inference_graph_only_where_it_is_exact() -> None:
    tower = TextTower()
    cpu = torch.device("cpu")
    assert tower._inference_graph(cpu) is None  # autograd on (training, LoRA tuning)
    with torch.inference_mode():
        assert tower._inference_graph(torch.device("meta")) is None  # not a CPU tensor
        graph = tower._inference_graph(cpu)
        assert graph is not None and tower._inference_graph(cpu) is graph  # traced once
        tower.net.train()
        assert tower._inference_graph(cpu) is None  # dropout on: the module runs
        tower.net.eval()
        tower.float()  # moved or cast: traced again, never a stale graph
        assert tower._graph is None
        fresh = tower._inference_graph(cpu)
        tower.net = copy.deepcopy(tower.net)  # a LoRA merge replaces the network
        assert tower._inference_graph(cpu) is not fresh
    assert pickle.loads(pickle.dumps(tower))._graph is None  # Ray sends the module, not it
