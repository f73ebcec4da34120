"""HTTP and websocket routers, one module per resource."""
