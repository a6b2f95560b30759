"""Starting engines and routers as processes: the supervisor, fleet launches, router
processes, launch logs, CPU recipes and the engines' own virtual environments."""
