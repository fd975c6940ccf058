"""The broker: ``regroup serve``, its settings, listeners and connections, and one handler module per API."""
