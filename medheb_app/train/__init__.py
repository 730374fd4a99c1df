"""Training: losses (pure functions), the generic contrastive trainer, and the paper recipes."""
