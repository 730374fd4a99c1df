"""Rankers beyond cosine similarity: the logic-aware ranker that enforces a query's constraints."""
