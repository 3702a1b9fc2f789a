"""The command line: typer commands that run the engines and draw their progress."""
