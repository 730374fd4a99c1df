"""Who is asking, and how often: per-client rate limits with lockout, shared by every handler
that an anonymous request can reach (sign-in, the admin password, searches, uploads)."""
