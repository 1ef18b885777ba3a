"""Static typing checks: mypy run on small programs that use Fore's typed APIs."""
