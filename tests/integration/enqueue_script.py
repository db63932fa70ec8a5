"""The script the E006 tests run in a project's ``manage.py shell``: enqueue each of
``PATHS`` (defined before it) and print what became of it."""

ENQUEUE = (
    "from django_pgqueue import enqueue\n"
    "from django_pgqueue.exceptions import InvalidJob\n"
    "for path in PATHS:\n"
    "    try:\n"
    "        print(path, enqueue(path, [1]).status)\n"
    "    except InvalidJob as exc:\n"
    "        print(path, 'refused', exc)\n"
    "    except Exception as exc:\n"
    "        print(path, 'raised', repr(exc))\n"
)
