"""Prebuilt FAISS indices with their metadata, and the embedding cache.

faiss_index.VectorIndex is the FAISS backend; cache.EmbeddingCache keeps vectors by
(model fingerprint, item id); catalog names indices over collections of Studies.
"""
