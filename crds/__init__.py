"""railtrain.crds."""
