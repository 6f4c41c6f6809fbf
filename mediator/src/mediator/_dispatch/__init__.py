"""The mediator itself: routes compiled from handlers and behaviors, sent, published."""
