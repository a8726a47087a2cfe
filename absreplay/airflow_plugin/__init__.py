"""The "ABS Replay" view inside Airflow's UI: an Airflow 3 plugin installed with the project.

Registered through the ``airflow.plugins`` entry point (pyproject.toml), so an
Airflow in the same environment loads it with nothing copied into AIRFLOW_HOME.
It mounts a FastAPI app at ``/absreplay`` (server-rendered pages and their JSON)
and adds an "ABS Replay" entry to the navigation that shows it inside the UI.
"""

from __future__ import annotations

from airflow.plugins_manager import AirflowPlugin

from absreplay.airflow_plugin.app import URL_PREFIX, app


class AbsReplayPlugin(AirflowPlugin):
    name = "absreplay"
    fastapi_apps = [{"app": app, "url_prefix": URL_PREFIX, "name": "ABS Replay"}]
    external_views = [
        {"name": "ABS Replay", "href": f"{URL_PREFIX}/", "destination": "nav", "url_route": "absreplay",
         "category": "browse"},
    ]
