"""The console's search box: one query across incidents, runs, nodes and postmortems (issue 20).

query.py parses what was typed and cuts the snippets (plain Python); selectors.py asks the database (full-text search
on PostgreSQL, a plain substring match elsewhere); page.py is the /search page and its live htmx panel."""
