"""crashcart in Slack (issue 12): ask it in a thread, approve through buttons, get paged.

    SlackSettings   cluster.yaml's `slack:` section (where the secrets are, the default channel)
    SlackService    one cluster, its guard policy, the shared store and checkpoints
    build_app       the Bolt app (slack_bolt loads only when it is called)
    blocks          Block Kit for an incident (shared with the Slack notifier)
"""

from crashcart.agent.interfaces.slack._ask import SlackService, incident_for_thread
from crashcart.agent.interfaces.slack._settings import SlackConfigError, SlackSettings
from crashcart.agent.interfaces.slack.app import build_app

__all__ = ["SlackConfigError", "SlackService", "SlackSettings", "build_app", "incident_for_thread"]
