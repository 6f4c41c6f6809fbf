"""The resilient transports: httpx's seam, the pipeline behind it, the sync deadline."""
