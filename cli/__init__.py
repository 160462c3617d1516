"""railtrain.cli."""
