"""Flask, FastAPI and Django integrations, each importing its framework lazily."""
