"""bisect_torch.py and what it builds on: indexes of wheels, the cache, builds and their environments."""
