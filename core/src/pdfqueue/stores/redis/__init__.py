"""Redis: live batch state, the arq queue, fair dispatch, quotas and their Lua scripts."""
