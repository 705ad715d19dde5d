"""Media that clients send with their messages: resolved (a data: URL decoded; remote URLs
later) and checked in the web process, so that a worker only ever gets an image's bytes,
its type and its hash."""
