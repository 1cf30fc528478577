"""backend=hummingbirdxt: AMD HummingbirdXT (video-diffusion post-training). Importing this package does not import it."""
