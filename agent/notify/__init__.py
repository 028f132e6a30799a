"""Getting escalations and notifications to people.

`notifiers:` in cluster.yaml lists where they go; each entry's `kind` picks one module here
through `KINDS` (a new kind, Slack for one, is one more module and one more line there).
The store is always the first stop: an escalation is journaled before anything is sent, and a
notifier that keeps failing leaves a dead-letter record with the payload, so nothing is lost.
"""

from crashcart.agent.notify.base import DeliveryError, Notification, Notifier, NotifierSettings
from crashcart.agent.notify.dispatch import Dispatcher
from crashcart.agent.notify.registry import KINDS, parse_notifiers

__all__ = ["KINDS", "DeliveryError", "Dispatcher", "Notification", "Notifier", "NotifierSettings", "parse_notifiers"]
