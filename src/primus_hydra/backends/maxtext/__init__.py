"""backend=maxtext: AI-Hypercomputer/maxtext (JAX). Importing this package imports neither MaxText nor JAX."""
