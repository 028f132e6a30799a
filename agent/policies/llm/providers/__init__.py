"""Provider adapters: official SDKs, imported only when a model of theirs is made."""
