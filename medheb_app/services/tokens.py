"""API tokens for the admin tab and `token create|list|revoke` (`services.tokens`): the same
functions as medheb_app.api.tokens, bound to the store. TOKEN_SCOPES (the scopes a token may
have) is re-exported for the command's --scope choices."""

from __future__ import annotations

from medheb_app.api.tokens import TokenError, TokenInfo, create_token, list_tokens, revoke_token
from medheb_app.store.api_tables import TOKEN_SCOPES
from medheb_app.store.db import Store

__all__ = ["TOKEN_SCOPES", "TokenError", "TokenInfo", "Tokens"]


class Tokens:
    """Issue (the secret returned once), list and revoke API tokens."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def create(
        self, scope: str, days: float | None, name: str = "", created_by: str = "cli"
    ) -> tuple[str, TokenInfo]:
        """(secret, info) of a new token; TokenError for a scope or lifetime refused."""
        return create_token(self.store, scope, days, name, created_by)

    def list(self) -> list[TokenInfo]:
        """Every token ever issued, newest first."""
        return list_tokens(self.store)

    def revoke(self, token_id: int) -> TokenInfo:
        """Revoke a token at once; TokenError for an unknown id."""
        return revoke_token(self.store, token_id)
