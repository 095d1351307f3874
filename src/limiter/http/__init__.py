"""Framework-free HTTP: the request view, client keys, headers, rules and the decision."""
