"""Small models for demos and tests of the data path."""
