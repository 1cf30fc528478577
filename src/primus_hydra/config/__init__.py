"""Compose-time code: schemas, the conf/ locator and validation. Never imports torch."""
