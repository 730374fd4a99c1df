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


def test_the_queue_poll_interval_comes_from_the_environment_and_is_bounded(monkeypatch) -> None:
    assert Settings.from_env().queue_poll_ms == 10.0
    monkeypatch.setenv("QUEUE_POLL_MS", "2.5")
    assert Settings.from_env().queue_poll_ms == 2.5
    for wrong in ("0", "0.1", "5000"):
        monkeypatch.setenv("QUEUE_POLL_MS", wrong)
        with pytest.raises(ValueError, match=r"QUEUE_POLL_MS must be between 0\.5 and 1000"):
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


def test_an_https_public_origin_makes_cookies_secure_unless_turned_off(monkeypatch) -> None:
    """The adversarial pass (B6): PUBLIC_ORIGIN=https://... without SECURE_COOKIES issued the
    admin cookie without Secure and said nothing."""
    monkeypatch.delenv("SECURE_COOKIES", raising=False)
    monkeypatch.delenv("PUBLIC_ORIGIN", raising=False)
    assert Settings.from_env().secure_cookies is False  # a plain local server: http
    monkeypatch.setenv("PUBLIC_ORIGIN", "https://medheb.example/")
    settings = Settings.from_env()
    assert settings.public_origins == ("https://medheb.example",)
    assert settings.secure_cookies is True and settings.start_warnings == ()
    # an http origin among them: Secure cookies would lock its users out, so off, and warned
    monkeypatch.setenv("PUBLIC_ORIGIN", "https://medheb.example,http://ward.local:7860")
    assert Settings.from_env().secure_cookies is False
    assert len(Settings.from_env().start_warnings) == 1
    monkeypatch.setenv("PUBLIC_ORIGIN", "http://ward.local:7860")
    assert Settings.from_env().secure_cookies is False
    assert Settings.from_env().start_warnings == ()  # nothing https: nothing to warn about
    monkeypatch.setenv("PUBLIC_ORIGIN", "https://medheb.example")
    monkeypatch.setenv("SECURE_COOKIES", "0")  # a test rig may still turn it off ...
    rig = Settings.from_env()
    assert rig.secure_cookies is False
    (warning,) = rig.start_warnings  # ... and is told, in one line
    assert "SECURE_COOKIES" in warning and "https" in warning and "\n" not in warning
    monkeypatch.setenv("SECURE_COOKIES", "yes")
    assert Settings.from_env().secure_cookies is True
    monkeypatch.setenv("SECURE_COOKIES", "ture")  # a typo is refused, never read as "off"
    with pytest.raises(ValueError, match="SECURE_COOKIES"):
        Settings.from_env()


def test_app_py_logs_one_warning_when_https_cookies_are_turned_off(monkeypatch, caplog) -> None:
    import importlib.util
    import logging

    from medheb_app.settings import PROJECT_ROOT

    spec = importlib.util.spec_from_file_location("app_main", PROJECT_ROOT / "app.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.delenv("ADMIN_USERS", raising=False)  # no OAuth check to refuse the start
    monkeypatch.setenv("PUBLIC_ORIGIN", "https://medheb.example")
    monkeypatch.setenv("SECURE_COOKIES", "0")
    with caplog.at_level(logging.WARNING):
        assert module.startup_settings().secure_cookies is False
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "SECURE_COOKIES" in warnings[0].getMessage()
    caplog.clear()
    monkeypatch.delenv("SECURE_COOKIES")
    with caplog.at_level(logging.WARNING):
        assert module.startup_settings().secure_cookies is True
    assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []
