"""Network side: listener, per-connection protocol with ordered responses, dispatch table."""
