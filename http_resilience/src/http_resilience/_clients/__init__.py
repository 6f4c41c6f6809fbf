"""The clients built here: `create_client`, named clients, `HttpClientFactory`.

Each client runs on resilient transports (`http_resilience._transport`) and
the factory answers their health (`http_resilience._health`), so this folder
sits above both. The environment's proxies are read here too, as httpx
reads them, since only a client routes by them.
"""
