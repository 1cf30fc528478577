"""Backend adapters (one package per backend). Importing an adapter module never imports its library."""
