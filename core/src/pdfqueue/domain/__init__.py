"""The domain: models, errors, keys, settings; imports no other layer."""
