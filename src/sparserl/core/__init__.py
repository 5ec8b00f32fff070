"""Foundation: config loading and validation, artifact paths, atomic artifacts with manifests."""
