"""railtrain.operator."""
