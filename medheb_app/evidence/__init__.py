"""What a study is, how it is read from disk, and the finding vocabularies."""
