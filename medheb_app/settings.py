"""One settings object, read from the environment once and passed down explicitly."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parent.parent
SHARED_DATA_DIR = PROJECT_ROOT.parent / "shared" / "data"
AUTO_MODEL = "auto"
PRECISIONS = ("auto", "fp32")


def listen_address(env: Mapping[str, str]) -> tuple[str, int]:
    """(HOST, PORT) from `env`: 127.0.0.1:7860 unless set (a container sets HOST=0.0.0.0)."""
    return env.get("HOST", "127.0.0.1"), int(env.get("PORT", "7860"))


def _names(text: str) -> tuple[str, ...]:
    return tuple(name.strip() for name in text.split(",") if name.strip())


def parse_proxy_hops(value: str) -> int:
    """TRUST_PROXY_HEADERS as a number of trusted proxy hops: '' / '0' / 'false' / 'no' is 0
    (no proxy: the peer address counts), 'true' / 'yes' is 1 (one proxy, as on a Space),
    'N' is N. Anything else is refused, so a typo never silently trusts a forged header."""
    text = value.strip().lower()
    if text in {"", "false", "no", "off"}:
        return 0
    if text in {"true", "yes", "on"}:
        return 1
    if text.isdigit() and int(text) <= 16:
        return int(text)
    raise ValueError(
        f"TRUST_PROXY_HEADERS must be the number of proxies in front of the app (0-16), "
        f"not {value!r}"
    )


def parse_secure_cookies(value: str) -> bool | None:
    """SECURE_COOKIES as on (True), off (False) or unset (None: decided by PUBLIC_ORIGIN).
    Anything else is refused, so a typo never silently drops the Secure flag."""
    text = value.strip().lower()
    if text == "":
        return None
    if text in {"1", "true", "yes", "on"}:
        return True
    if text in {"0", "false", "no", "off"}:
        return False
    raise ValueError(f"SECURE_COOKIES must be 1 or 0, not {value!r}")


def _is_https(origin: str) -> bool:
    return origin.strip().lower().startswith("https://")


def _served_over_https(public_origins: tuple[str, ...]) -> bool:
    """Whether every origin browsers use (PUBLIC_ORIGIN) is https, so cookies can be Secure
    (with an http origin among them, Secure cookies would lock its users out)."""
    return bool(public_origins) and all(_is_https(origin) for origin in public_origins)


def parse_source_roots(text: str) -> tuple[tuple[str, Path], ...]:
    """MEDHEB_SOURCE_ROOTS "name=/path,name2=/path2" -> ((name, path), ...); a malformed
    entry is refused, so a typo never leaves an archive unnamed."""
    roots = []
    for entry in (part.strip() for part in text.split(",")):
        if not entry:
            continue
        name, equals, path = entry.partition("=")
        if not equals or not name.strip().isidentifier() or not path.strip():
            raise ValueError(
                f"MEDHEB_SOURCE_ROOTS entries are name=/path (name: letters, digits, _); "
                f"not {entry!r}"
            )
        roots.append((name.strip(), Path(path.strip()).expanduser()))
    return tuple(roots)


def _default_data_dir() -> Path:
    """DATA_DIR, else /data on a Hugging Face Space with persistent storage, else data/runtime."""
    if os.environ.get("DATA_DIR"):
        return Path(os.environ["DATA_DIR"])
    if Path("/data").is_dir() and os.access("/data", os.W_OK):
        return Path("/data/medheb")
    return PROJECT_ROOT / "data" / "runtime"


@dataclass(frozen=True)
class Settings:
    """Where things live and the defaults the app and CLI start from."""

    data_dir: Path = field(default_factory=_default_data_dir)
    database_url: str = ""
    admin_password: str = ""
    device: str = "auto"  # MEDHEB_DEVICE: auto (CUDA when present), cpu, cuda, cuda:N
    # MEDHEB_DEFAULT_MODEL: "auto" (the strongest shipped model built for the index searched,
    # medheb_app.search.default_model) or a model spec the operator pins everywhere
    default_model: str = AUTO_MODEL
    default_index: str = "demo-cxr"
    max_upload_bytes: int = 512 * 1024 * 1024
    shared_data_dir: Path = SHARED_DATA_DIR
    models_dir: Path = PROJECT_ROOT / "models"
    demo_seed: int = 0
    demo_size: int = 2000
    index_memory_mb: float | None = None  # IVF-PQ lists go to disk above it (None: the default)
    # MEDHEB_DEMO_MODELS: the models the demo index is built for (comma-separated; empty: the
    # pinned or base model, plus the label-aware fine-tune; medheb_app.serving)
    demo_models: tuple[str, ...] = ()
    precision: str = "auto"  # MEDHEB_PRECISION: "auto" (bf16/fp16 autocast on CUDA) or "fp32"
    host: str = "127.0.0.1"  # HOST: the address app.py serves on (a container sets 0.0.0.0)
    port: int = 7860  # PORT
    session_secret: str = ""
    # SECURE_COOKIES: cookies Secure and __Host- prefixed, only https origins may post; None
    # (unset) means on exactly when every PUBLIC_ORIGIN is https (resolved in __post_init__)
    secure_cookies: bool | None = None
    queue_max_size: int = 64
    queue_per_client: int = 8  # QUEUE_PER_CLIENT: events one client may have waiting or running
    concurrency: int = 4
    # QUEUE_POLL_MS: how often an idle Gradio queue looks for a new event (Gradio polls every
    # 1 ms on Linux: ~9% of a core for an app doing nothing); progress is sent at most every
    # 10 intervals. medheb_app.access.queue_guard.poll_gently
    queue_poll_ms: float = 10.0
    query_threads: int = 1  # MEDHEB_QUERY_THREADS: torch threads per query encode (0: torch's)
    # MEDHEB_QUERY_CACHE: query texts whose embedding each loaded model keeps (LRU; 0: none);
    # medheb_app.models.query_cache
    query_cache: int = 4096
    # MEDHEB_QUERY_BATCH: most query texts that concurrent cache misses share one forward pass
    # with (1: each encoded alone); medheb_app.models.query_cache.QueryBatcher
    query_batch: int = 16
    # MEDHEB_ANSWER_CACHE: API text-search answers kept (LRU; 0: none); medheb_app/api/answers.py
    answer_cache: int = 2048
    # MEDHEB_STUDY_PAUSES_SEARCH: while a reader study is open, only admins search with the
    # models it compares (services.search.SearchService.blinded); "0" keeps them searchable
    study_pauses_search: bool = True
    api_token_rate: int = 600  # MEDHEB_API_TOKEN_RATE: requests a minute per API token
    admin_users: tuple[str, ...] = ()
    # TRUST_PROXY_HEADERS: how many proxies in front of the app append to X-Forwarded-For
    # (0: none, the peer address is the client; 1 on a Space); medheb_app.access.limits
    trusted_proxy_hops: int = 0
    # PUBLIC_ORIGIN: the origins browsers use for this server (comma-separated), needed only
    # behind a proxy that rewrites Host; state-changing requests from any other origin are
    # refused (medheb_app.access.origin)
    public_origins: tuple[str, ...] = ()
    # UPLOAD_TTL_S: an upload not consumed within this many seconds is deleted (and at start)
    upload_ttl_s: float = 600.0
    # MEDHEB_PSEUDONYM_KEY: the secret of the keyed item pseudonyms of folder and DICOM
    # indices (HMAC-SHA256, medheb_app.index.provenance); empty: a random key kept in
    # DATA_DIR/pseudonym.key (created on first use, readable by the owner only)
    pseudonym_key: str = ""
    # MEDHEB_SOURCE_ROOTS: named roots of the archives indexed here ("pacs=/data/pacs,
    # exports=/mnt/exports"); catalogs name a source by its root, never by the path typed
    source_roots: tuple[tuple[str, Path], ...] = ()
    # MEDHEB_PUBLIC_INDICES: indices of real (non-synthetic) studies that anonymous visitors
    # and token-less API calls may search ("nih,ward"; "*": every built index, for a server
    # only your own network reaches). Synthetic indices are always public; the rest need a
    # token (medheb_app.serving.offered)
    public_indices: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "default_model", self.default_model.strip() or AUTO_MODEL)
        if self.secure_cookies is None:
            object.__setattr__(self, "secure_cookies", _served_over_https(self.public_origins))
        if not self.database_url:
            object.__setattr__(self, "database_url", f"sqlite:///{self.data_dir / 'medheb.sqlite'}")
        if self.max_upload_bytes <= 0:
            raise ValueError("MAX_UPLOAD_BYTES must be positive")
        if self.precision not in PRECISIONS:
            raise ValueError(f"MEDHEB_PRECISION must be one of {', '.join(PRECISIONS)}")
        if self.upload_ttl_s <= 0:
            raise ValueError("UPLOAD_TTL_S must be positive")
        if not 0 <= self.trusted_proxy_hops <= 16:
            raise ValueError("TRUST_PROXY_HEADERS must be a number of proxies from 0 to 16")
        if self.queue_max_size < 1 or self.concurrency < 1 or self.queue_per_client < 1:
            raise ValueError("QUEUE_MAX_SIZE, CONCURRENCY and QUEUE_PER_CLIENT must be at least 1")
        if not 0.5 <= self.queue_poll_ms <= 1000:
            raise ValueError("QUEUE_POLL_MS must be between 0.5 and 1000 milliseconds")

    @property
    def start_warnings(self) -> tuple[str, ...]:
        """Lines app.py logs at start for a setting it accepts but an operator should know
        about: cookies without Secure although PUBLIC_ORIGIN names an https origin."""
        if self.secure_cookies or not any(_is_https(o) for o in self.public_origins):
            return ()
        return (
            "SECURE_COOKIES is off although PUBLIC_ORIGIN names an https origin, so the admin "
            "and rater cookies are not marked Secure and may travel over plain http; set "
            "SECURE_COOKIES=1 unless this is a test rig",
        )

    @property
    def pinned_model(self) -> str | None:
        """The model spec the operator pinned (MEDHEB_DEFAULT_MODEL), or None for "auto"."""
        return None if self.default_model == AUTO_MODEL else self.default_model

    @property
    def demo_dir(self) -> Path:
        return self.data_dir / "demo"

    @property
    def index_dir(self) -> Path:
        return self.data_dir / "indices"

    @property
    def cache_dir(self) -> Path:
        return self.data_dir / "embedding-cache"

    @property
    def runs_dir(self) -> Path:
        return self.data_dir / "runs"

    @property
    def trained_models_dir(self) -> Path:
        """Checkpoints trained at run time; committed weights live in models_dir."""
        return self.data_dir / "models"

    @classmethod
    def from_env(cls, **overrides: object) -> Settings:
        """Build settings from environment variables; keyword overrides win."""
        env = os.environ
        values: dict[str, object] = {
            "data_dir": _default_data_dir(),
            "database_url": env.get("DATABASE_URL", ""),
            "admin_password": env.get("ADMIN_PASSWORD", ""),
            "device": env.get("MEDHEB_DEVICE", "auto"),
            "default_model": env.get("MEDHEB_DEFAULT_MODEL", AUTO_MODEL),
            "default_index": env.get("MEDHEB_DEFAULT_INDEX", "demo-cxr"),
            "max_upload_bytes": int(env.get("MAX_UPLOAD_BYTES", 512 * 1024 * 1024)),
            "demo_size": int(env.get("MEDHEB_DEMO_SIZE", 2000)),
            "demo_models": _names(env.get("MEDHEB_DEMO_MODELS", "")),
            "precision": env.get("MEDHEB_PRECISION", "auto").strip().lower() or "auto",
            "host": listen_address(env)[0],
            "port": listen_address(env)[1],
            "session_secret": env.get("SESSION_SECRET", ""),
            "secure_cookies": parse_secure_cookies(env.get("SECURE_COOKIES", "")),
            "queue_max_size": int(env.get("QUEUE_MAX_SIZE", 64)),
            "concurrency": int(env.get("CONCURRENCY", 4)),
            "queue_per_client": int(env.get("QUEUE_PER_CLIENT", 8)),
            "queue_poll_ms": float(env.get("QUEUE_POLL_MS", 10)),
            "query_threads": int(env.get("MEDHEB_QUERY_THREADS", 1)),
            "query_cache": int(env.get("MEDHEB_QUERY_CACHE", 4096)),
            "query_batch": int(env.get("MEDHEB_QUERY_BATCH", 16)),
            "answer_cache": int(env.get("MEDHEB_ANSWER_CACHE", 2048)),
            "study_pauses_search": env.get("MEDHEB_STUDY_PAUSES_SEARCH", "1").strip().lower()
            not in {"0", "false", "no"},
            "trusted_proxy_hops": parse_proxy_hops(env.get("TRUST_PROXY_HEADERS", "")),
            "public_origins": tuple(
                o.strip().rstrip("/") for o in env.get("PUBLIC_ORIGIN", "").split(",") if o.strip()
            ),
            "upload_ttl_s": float(env.get("UPLOAD_TTL_S", 600)),
            "api_token_rate": int(env.get("MEDHEB_API_TOKEN_RATE", 600)),
            "admin_users": _names(env.get("ADMIN_USERS", "")),
            "public_indices": _names(env.get("MEDHEB_PUBLIC_INDICES", "")),
        }
        if env.get("MEDHEB_PSEUDONYM_KEY"):
            values["pseudonym_key"] = env["MEDHEB_PSEUDONYM_KEY"]
        if env.get("MEDHEB_SOURCE_ROOTS"):
            values["source_roots"] = parse_source_roots(env["MEDHEB_SOURCE_ROOTS"])
        if env.get("MEDHEB_INDEX_MEMORY_MB"):
            values["index_memory_mb"] = float(env["MEDHEB_INDEX_MEMORY_MB"])
        if env.get("MEDHEB_SHARED_DATA"):
            values["shared_data_dir"] = Path(env["MEDHEB_SHARED_DATA"])
        values.update(overrides)
        return cls(**values)  # type: ignore[arg-type]
