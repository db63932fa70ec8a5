"""``python -m benchmarks`` (``make bench``): django-pgqueue measured against the design
article's plain-psycopg queue and django-tasks-db, in one run against one database."""
