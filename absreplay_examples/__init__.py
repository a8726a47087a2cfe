"""The reference jobs, written with the public API only (``absreplay.api``) and found as plugins
through the ``absreplay.jobs`` entry-point group, as a user's own package would be."""
