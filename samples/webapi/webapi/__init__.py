"""The web sample: an orders service on FastAPI, calling an inventory service.

`webapi.app.create_app` builds the orders service; `webapi.inventory` is the
inventory it calls, flaky on purpose; `demo.py` beside this package runs both
on 127.0.0.1 and drives a load through them.
"""
