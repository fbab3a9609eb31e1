"""Console pages that show the record and the response together: they may import runs and incidents, which
never import them."""
