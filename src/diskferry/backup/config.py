"""The repository's `config` object: id, format, chunk size, cipher and KDF — never a key."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

# 2: manifests stored in pages (snapshots.py); 3: config authenticated by the keys (config_seal.py)
FORMAT_VERSION = 3
# the format whose repositories `repo upgrade` brings to FORMAT_VERSION (upgrade.py)
UPGRADABLE_VERSION = 2
DEFAULT_CHUNK_SIZE = 1 << 20
MAX_CHUNK_SIZE = 64 << 20


class KdfParams(BaseModel):
    """scrypt parameters for wrapping the repository keys."""

    name: Literal["scrypt"] = "scrypt"
    n: int = 1 << 16
    r: int = 8
    p: int = 1


class RepoConfig(BaseModel):
    """What a client must know before it can open a repository."""

    model_config = ConfigDict(extra="forbid")

    id: str = Field(pattern=r"^[0-9a-f]{32}$")
    version: int = FORMAT_VERSION
    chunk_size: int = Field(default=DEFAULT_CHUNK_SIZE, gt=0, le=MAX_CHUNK_SIZE)
    cipher: Literal["aes-256-gcm", "none"] = "aes-256-gcm"
    compression: Literal["zstd"] = "zstd"
    kdf: KdfParams = KdfParams()
    max_incrementals: int = Field(default=0, ge=0)

    @property
    def encrypted(self) -> bool:
        """Whether chunks and metadata are sealed."""
        return self.cipher != "none"
