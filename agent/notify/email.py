"""Email over SMTP (stdlib smtplib): plain, STARTTLS or SMTPS, with a login when configured."""

from __future__ import annotations

import smtplib
import ssl
from email.message import EmailMessage
from typing import Literal

from pydantic import Field, model_validator

from crashcart.agent.notify.base import DeliveryError, Notification, NotifierSettings, reveal, secret


class EmailSettings(NotifierSettings):
    kind: Literal["email"]
    host: str
    port: int = Field(25, ge=1, le=65535)
    security: Literal["none", "starttls", "ssl"] = "none"
    username: str | None = None
    password_env: str | None = None
    password_file: str | None = None
    sender: str
    to: list[str] = Field(min_length=1)
    timeout: float = Field(15, gt=0, le=300)

    @model_validator(mode="after")
    def _login(self) -> EmailSettings:
        if (self.password_env or self.password_file) and not self.username:
            raise ValueError("a password needs a username")
        if self.password_env and self.password_file:
            raise ValueError("give password_env or password_file, not both")
        return self

    def build(self) -> EmailNotifier:
        return EmailNotifier(self)


class EmailNotifier:
    def __init__(self, settings: EmailSettings):
        self.settings = settings

    def send(self, n: Notification) -> None:
        s = self.settings
        message = EmailMessage()
        message["Subject"] = n.subject
        message["From"] = s.sender
        message["To"] = ", ".join(s.to)
        message["Message-ID"] = f"<{n.incident_id}.{n.action_id}@crashcart>"
        message.set_content(n.text())
        password = reveal(secret(s.password_env, s.password_file), f"email {s.label} password")
        where = f"SMTP {s.host}:{s.port}"
        stage = "connect"
        try:
            if s.security == "ssl":
                client = smtplib.SMTP_SSL(s.host, s.port, timeout=s.timeout, context=ssl.create_default_context())
            else:
                client = smtplib.SMTP(s.host, s.port, timeout=s.timeout)
            with client:
                if s.security == "starttls":
                    client.starttls(context=ssl.create_default_context())
                if s.username:
                    stage = "login"
                    client.login(s.username, password or "")
                stage = "send"
                client.send_message(message)
        except smtplib.SMTPAuthenticationError as e:
            raise DeliveryError(f"{where}: login as {s.username} refused ({e.smtp_code})", permanent=True) from None
        except smtplib.SMTPResponseException as e:
            detail = e.smtp_error.decode(errors="replace") if isinstance(e.smtp_error, bytes) else str(e.smtp_error)
            raise DeliveryError(f"{where}: {e.smtp_code} {detail}", permanent=e.smtp_code >= 500) from None
        except smtplib.SMTPRecipientsRefused as e:
            raise DeliveryError(f"{where}: recipients refused: {', '.join(e.recipients)}", permanent=True) from None
        except (smtplib.SMTPException, OSError) as e:
            if stage == "login":
                # A server that hangs up on a login refused it; sending the password again won't help.
                raise DeliveryError(f"{where}: login as {s.username} refused ({e})", permanent=True) from None
            raise DeliveryError(f"{where}: {e}") from None
