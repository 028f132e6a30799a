"""crashcart in Slack: Block Kit rendering (blocks.py) shared by the Slack app and the `slack`
notifier. Nothing here imports slack_sdk or Bolt at import time: `crashcart --help` and the
notifiers load without them."""
