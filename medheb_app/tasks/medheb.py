"""The "medheb-lite" suite: all eight MedHEB families, small enough to run on a laptop CPU.

Each task is built by code from a source (the phantom corpus or real data in ../shared/data)
with the paper's instruction templates (Appendix A.6, quoted; adapted wording is marked), the
source's test part for evaluation and its train part for the MedEmb recipe's training pairs.
Real sources used only as held-out-source (never in training): NIH ChestX-ray14 and the
prostate MRI. Query counts are capped so the whole suite embeds in minutes on CPU.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from medheb_app.evidence.phantoms import region_description, saved
from medheb_app.evidence.study import EmbedItem
from medheb_app.settings import Settings
from medheb_app.tasks.base import (
    Item,
    Part,
    Suite,
    Task,
    TaskMetadata,
    TaskSpec,
    TaskUnavailable,
    revision,
)
from medheb_app.tasks.builders import generic, phantom, real
from medheb_app.tasks.manifest import manifest_suite

# Corpus sizes and caps: the phantom test split (20% of patients) gives ~{CHEST_N/5} studies.
CHEST_N = 2000
CHEST_SEED = 0
VOLUME_SUBJECTS = 50
VOLUME_SEED = 0
MAX_QUERIES = {"test": 200, "train": 1500}
GRADED_MAX_QUERIES = 150

# MedHEB Appendix A.6 templates.
INST_I2I = "Find the same category image with the provided image:"
INST_T2I = "Find an image that matches the given category:"
INST_QUESTION = "Represent the given image with the following question:"
TEXT_CXR_LABEL = "What is the radiological abnormal findings observed in this chest X-ray?"
INST_I2REP = "Represent the given chest X-ray image for radiology report retrieval:"
INST_VG = "Locate the specific region that corresponds to the provided text description."
INST_T1T2 = "Find a T2-weighted MRI series that matches the given T1-weighted MRI series:"
INST_GRADED = "Find chest X-ray images that share the most disease findings with the given image:"
INST_QA = "Find the answer of the given question:"
INST_F2I = "Identifying impressions based on given radiology findings."
# Adapted from Table 10's modality-bridging templates (direction or modality changed).
INST_CT2XRAY = "Find a chest X-ray image that matches the given CT series:"
INST_T2DWI = "Find a diffusion-weighted MRI slice that matches the given T2-weighted MRI slice:"


def _meta(name: str, family: str, form: str, split: str, source: str, **fields) -> TaskMetadata:
    fields.setdefault("anatomy", "chest")
    return TaskMetadata(name=name, family=family, form=form, split=split, source=source, **fields)


def _cap(part: Part) -> int:
    return MAX_QUERIES[part]


def label_text(label: str) -> str:
    """A label as the text a T-I query or I-Lab candidate reads ('Pleural Effusion')."""
    return label.replace("_", " ")


# ---- phantom chest (ID) ------------------------------------------------------------------


def _chest(settings: Settings, part: Part) -> tuple[list, str]:
    key = saved.CorpusKey("cxr", CHEST_N, CHEST_SEED)
    studies = phantom.in_part(saved.saved_studies(saved.corpora_root(settings), key), part)
    rev = revision("phantom-cxr", CHEST_N, CHEST_SEED, key.generator, [s.id for s in studies])
    return studies, rev


def _phantom_meta(name: str, family: str, description: str, rev: str, **fields) -> TaskMetadata:
    return _meta(
        name,
        family,
        "2d",
        "ID",
        phantom.SOURCE_2D,
        description=description,
        data_revision=rev,
        synthetic=True,
        **fields,
    )


def phantom_cxr_i2i(settings: Settings, part: Part = "test") -> Task:
    studies, rev = _chest(settings, part)
    meta = _phantom_meta(
        "phantom-cxr-i2i",
        "I-I",
        "Same single CheXpert finding, other patients.",
        rev,
        qry_inst=INST_I2I,
    )
    items = phantom.labelled_chest(studies, rev)
    return generic.same_label_task(meta, items, _cap(part), seed=1)


def _label_id(source: str) -> Callable[[str], str]:
    return lambda label: f"label:{source}:{label}"


def phantom_cxr_i2label(settings: Settings, part: Part = "test") -> Task:
    studies, rev = _chest(settings, part)
    meta = _phantom_meta(
        "phantom-cxr-i2label",
        "I-Lab",
        "Image to its single CheXpert label.",
        rev,
        qry_inst=INST_QUESTION,
        qry_text=TEXT_CXR_LABEL,
    )
    items = phantom.labelled_chest(studies, rev)
    return generic.image_to_label_task(
        meta, items, _label_id("chexpert"), label_text, max_queries=_cap(part), seed=2
    )


def phantom_cxr_t2i(settings: Settings, part: Part = "test") -> Task:
    studies, rev = _chest(settings, part)
    meta = _phantom_meta(
        "phantom-cxr-t2i",
        "T-I",
        "CheXpert label to single-label images.",
        rev,
        qry_inst=INST_T2I,
    )
    items = phantom.labelled_chest(studies, rev)
    return generic.label_to_image_task(meta, items, _label_id("chexpert"), label_text)


def phantom_cxr_i2report(settings: Settings, part: Part = "test") -> Task:
    studies, rev = _chest(settings, part)
    meta = _phantom_meta(
        "phantom-cxr-i2report",
        "I-Rep",
        "Image to its own report among the split's reports.",
        rev,
        qry_inst=INST_I2REP,
    )
    pairs = [
        (Item(phantom.item_id(s, rev), s), Item(phantom.item_id(s, rev) + ":report", s.text))
        for s in studies
        if s.text
    ]
    return generic.paired_task(
        meta, pairs, distractors=[t for _, t in pairs], max_queries=_cap(part), seed=3
    )


def phantom_cxr_vqa(settings: Settings, part: Part = "test") -> Task:
    studies, rev = _chest(settings, part)
    meta = _phantom_meta(
        "phantom-cxr-vqa",
        "VQA",
        "Presence (yes/no), side and severity questions.",
        rev,
        qry_inst=INST_QUESTION,
    )
    return phantom.vqa_task(meta, studies, rev, _cap(part), seed=4)


def phantom_cxr_vg(settings: Settings, part: Part = "test") -> Task:
    studies, rev = _chest(settings, part)
    meta = _phantom_meta(
        "phantom-cxr-vg",
        "VG",
        "Full image + region text to the box's crop among every crop of the sampled images "
        "(a region competes with its own image's other regions).",
        rev,
        qry_inst=INST_VG,
    )
    chosen = phantom.studies_with_boxes(studies, _cap(part), seed=5)
    return generic.paired_task(meta, phantom.region_pairs(chosen, rev, region_description))


def phantom_cxr_graded_severity(settings: Settings, part: Part = "test") -> Task:
    studies, rev = _chest(settings, part)
    meta = _phantom_meta(
        "phantom-cxr-graded-severity",
        "I-I",
        "Same finding; gain 1 same grade, 0.5 per grade apart.",
        rev,
        qry_inst=INST_GRADED,
        main_metric="ndcg@5",
        graded=True,
        relation="severity",
    )
    return phantom.graded_attribute_task(
        meta, studies, rev, "severity", phantom.severity_gain, GRADED_MAX_QUERIES, seed=6
    )


def phantom_cxr_graded_laterality(settings: Settings, part: Part = "test") -> Task:
    studies, rev = _chest(settings, part)
    meta = _phantom_meta(
        "phantom-cxr-graded-laterality",
        "I-I",
        "Same finding; same side 1, bilateral 0.5.",
        rev,
        qry_inst=INST_GRADED,
        main_metric="ndcg@5",
        graded=True,
        relation="laterality",
    )
    return phantom.graded_attribute_task(
        meta, studies, rev, "laterality", phantom.laterality_gain, GRADED_MAX_QUERIES, seed=7
    )


# ---- phantom volumes (ID) ----------------------------------------------------------------


def _volumes(settings: Settings, part: Part) -> tuple[list, str]:
    key = saved.CorpusKey("volumes", VOLUME_SUBJECTS, VOLUME_SEED)
    studies = phantom.in_part(saved.saved_studies(saved.corpora_root(settings), key), part)
    rev = revision(
        "phantom-vol", VOLUME_SUBJECTS, VOLUME_SEED, key.generator, [s.id for s in studies]
    )
    return studies, rev


def phantom_mr_t1_t2(settings: Settings, part: Part = "test") -> Task:
    studies, rev = _volumes(settings, part)
    meta = _meta(
        "phantom-mr-t1-t2",
        "MB-VR",
        "3d",
        "ID",
        phantom.SOURCE_3D,
        qry_inst=INST_T1T2,
        description="T1 MR volume to the same subject's T2 volume.",
        data_revision=rev,
        synthetic=True,
    )
    return generic.paired_task(meta, phantom.volume_pairs(studies, rev, "MR-T1", "MR-T2"))


def phantom_ct_xray(settings: Settings, part: Part = "test") -> Task:
    studies, rev = _volumes(settings, part)
    meta = _meta(
        "phantom-ct-xray",
        "MB-VR",
        "3d",
        "ID",
        phantom.SOURCE_3D,
        qry_inst=INST_CT2XRAY,
        description="CT volume to its radiograph-like projection.",
        data_revision=rev,
        synthetic=True,
    )
    return generic.paired_task(meta, phantom.volume_pairs(studies, rev, "CT", "DX-projection"))


# ---- real data -----------------------------------------------------------------------------


def prostate_t2_dwi(settings: Settings, part: Part = "test") -> Task:
    if part != "test":
        raise TaskUnavailable("prostate-t2-dwi is held-out-source: it has no training part")
    pairs, rev = real.prostate_slice_pairs(settings.shared_data_dir / "prostate-mri")
    meta = _meta(
        "prostate-t2-dwi",
        "MB-VR",
        "2d",
        "held-out-source",
        "prostate-mri",
        anatomy="prostate",
        qry_inst=INST_T2DWI,
        data_revision=rev,
        description="T2 slice to the DWI slice at the same position (one real subject).",
    )
    return generic.paired_task(meta, pairs)


def _nih(settings: Settings, part: Part) -> tuple[list[generic.LabelledItem], str]:
    if part != "test":
        raise TaskUnavailable("NIH ChestX-ray14 is held-out-source: it has no training part")
    studies, rev = real.load_nih_part(settings.shared_data_dir / "nih-cxr14-1000", "test")
    return real.nih_labelled(studies, rev), rev


def _nih_meta(name: str, family: str, description: str, rev: str, **fields) -> TaskMetadata:
    return _meta(
        name,
        family,
        "2d",
        "held-out-source",
        "nih-cxr14",
        description=description + " Test patients of a seeded 70/30 patient split.",
        data_revision=rev,
        **fields,
    )


def nih_i2i(settings: Settings, part: Part = "test") -> Task:
    items, rev = _nih(settings, part)
    meta = _nih_meta(
        "nih-i2i", "I-I", "Same single NIH label, other patients.", rev, qry_inst=INST_I2I
    )
    return generic.same_label_task(meta, items, _cap(part), seed=11)


def nih_i2label(settings: Settings, part: Part = "test") -> Task:
    items, rev = _nih(settings, part)
    meta = _nih_meta(
        "nih-i2label",
        "I-Lab",
        "Image to its single NIH label among the labels present.",
        rev,
        qry_inst=INST_QUESTION,
        qry_text=TEXT_CXR_LABEL,
    )
    return generic.image_to_label_task(
        meta, items, _label_id("nih"), label_text, max_queries=_cap(part), seed=12
    )


def nih_t2i(settings: Settings, part: Part = "test") -> Task:
    items, rev = _nih(settings, part)
    meta = _nih_meta("nih-t2i", "T-I", "NIH label to single-label images.", rev, qry_inst=INST_T2I)
    return generic.label_to_image_task(meta, items, _label_id("nih"), label_text)


def pubmedqa_q2context(settings: Settings, part: Part = "test") -> Task:
    pairs, rev = real.pubmedqa_pairs(settings.shared_data_dir / "pubmedqa", part)
    meta = _meta(
        "pubmedqa-q2context", "T-T", "text", "ID", "pubmedqa", anatomy="multi",
        qry_inst=INST_QA, data_revision=rev,
        description="PubMedQA question to its abstract context among the split's contexts.",
    )  # fmt: skip
    return generic.paired_task(
        meta, pairs, distractors=[t for _, t in pairs], max_queries=_cap(part), seed=21
    )


def iu_findings2impression(settings: Settings, part: Part = "test") -> Task:
    pairs, rev = real.iu_findings_impression_pairs(part)
    meta = _meta(
        "iu-findings2impression", "T-T", "text", "ID", "iu-xray", qry_inst=INST_F2I,
        data_revision=rev,
        description="IU X-ray findings to the report's impression (distinct impressions).",
    )  # fmt: skip
    return generic.paired_task(
        meta, pairs, distractors=[t for _, t in pairs], max_queries=_cap(part), seed=22
    )


def build_suite() -> Suite:
    """The registered medheb-lite suite (builders only; nothing is built until asked)."""
    suite = Suite(
        "medheb-lite",
        "MedHEB on this machine: phantom chest/volume tasks for every family (ID), real "
        "NIH, PubMedQA, IU reports and prostate MRI tasks from ../shared/data.",
    )
    entries = [
        (phantom_cxr_i2i, "I-I", "ID", phantom.SOURCE_2D, True),
        (phantom_mr_t1_t2, "MB-VR", "ID", phantom.SOURCE_3D, True),
        (phantom_ct_xray, "MB-VR", "ID", phantom.SOURCE_3D, True),
        (prostate_t2_dwi, "MB-VR", "held-out-source", "prostate-mri", False),
        (phantom_cxr_i2label, "I-Lab", "ID", phantom.SOURCE_2D, True),
        (phantom_cxr_i2report, "I-Rep", "ID", phantom.SOURCE_2D, True),
        (phantom_cxr_t2i, "T-I", "ID", phantom.SOURCE_2D, True),
        (phantom_cxr_vqa, "VQA", "ID", phantom.SOURCE_2D, True),
        (phantom_cxr_vg, "VG", "ID", phantom.SOURCE_2D, True),
        (nih_i2i, "I-I", "held-out-source", "nih-cxr14", False),
        (nih_i2label, "I-Lab", "held-out-source", "nih-cxr14", False),
        (nih_t2i, "T-I", "held-out-source", "nih-cxr14", False),
        (pubmedqa_q2context, "T-T", "ID", "pubmedqa", True),
        (iu_findings2impression, "T-T", "ID", "iu-xray", True),
        (phantom_cxr_graded_severity, "I-I", "ID", phantom.SOURCE_2D, False),
        (phantom_cxr_graded_laterality, "I-I", "ID", phantom.SOURCE_2D, False),
    ]
    for build, family, split, source, trainable in entries:
        name = build.__name__.replace("_", "-")
        suite.register(TaskSpec(name, family, split, source, build, trainable))
    return suite


SUITES: dict[str, Callable[[], Suite]] = {"medheb-lite": build_suite}


def get_suite(name: str) -> Suite:
    """A suite by name, or a folder of task manifests; unknown names list the known ones."""
    if name in SUITES:
        return SUITES[name]()
    if Path(name).is_dir():
        return manifest_suite(Path(name))
    raise KeyError(f"Unknown suite {name!r}; known: {', '.join(SUITES)} or a manifest folder")


TrainingPair = tuple[str, EmbedItem, EmbedItem, str]


def training_pairs(settings: Settings, suite_name: str = "medheb-lite") -> list[TrainingPair]:
    """(instruction, query item, target item, task name) from every ID task's train part.

    The target is each query's designated positive. Held-out-source and graded tasks give
    none: held-out sources must stay unseen (MedHEB section 3.1.3).
    """
    suite = get_suite(suite_name)
    names = [name for name, spec in suite.specs.items() if spec.trainable and spec.split == "ID"]
    tasks, _ = suite.build(settings, only=names, part="train")
    pairs: list[TrainingPair] = []
    for task in tasks:
        pool = {candidate.id: candidate.item for candidate in task.candidates}
        instruction = task.metadata.instruction
        for query in task.queries:
            pairs.append((instruction, query.item, pool[query.positives[0]], task.name))
    return pairs
