"""The call: the contract between the engine and a counterparty (`contract`), what an answer
means and how long to wait before the next attempt (`outcomes`, pure), and the HTTP client
behind `--counterparty-url` (`http`). Below the pod and the handlers: it imports neither."""
