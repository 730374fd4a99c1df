"""Environment variables are read once, by Settings.from_env, and reach the code as settings."""

from __future__ import annotations

import pytest

from medheb_app.models.device import autocast, place
from medheb_app.serving import default_demo_models
from medheb_app.settings import Settings, listen_address


def test_demo_models_precision_and_address_come_from_the_environment(monkeypatch) -> None:
    monkeypatch.setenv("MEDHEB_DEMO_MODELS", " oracle, ,random ")
    monkeypatch.setenv("MEDHEB_PRECISION", "FP32")
    monkeypatch.setenv("HOST", "0.0.0.0")
    monkeypatch.setenv("PORT", "8081")
    settings = Settings.from_env()
    assert settings.demo_models == ("oracle", "random")
    assert default_demo_models(settings) == ["oracle", "random"]
    assert settings.precision == "fp32"
    assert (settings.host, settings.port) == ("0.0.0.0", 8081)
    assert listen_address({}) == ("127.0.0.1", 7860)
    monkeypatch.setenv("MEDHEB_PRECISION", "fp8")
    with pytest.raises(ValueError, match="MEDHEB_PRECISION"):
        Settings.from_env()


def test_the_precision_setting_reaches_the_embedder_not_the_environment(monkeypatch) -> None:
    class Torchlike:
        precision = "auto"

        def to_device(self, device: str) -> None:
            self.device = device

    monkeypatch.setenv("MEDHEB_PRECISION", "auto")  # ignored: the settings object decides
    placed = place(Torchlike(), "cpu", "fp32")
    assert placed.precision == "fp32" and placed.device == "cpu"
    with autocast("cuda", "fp32"):  # fp32 is no autocast at all, even on CUDA
        pass
