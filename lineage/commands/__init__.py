"""One module per `klineage` sub-command; each defines a click command named `command`."""
