"""Input readers. Each turns its inputs into a `Catalog` and can read any window's bases."""
