"""`python -m tamto_cli`: the same as the `tamto` command."""

from tamto_cli.main import app

app(prog_name="tamto")
