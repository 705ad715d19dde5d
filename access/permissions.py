"""Who may use which part of /api: logged-in users, and staff for the lab's machinery.

Jobs, publishing, token settings (and the admin site) are for staff; other lab
pages for any logged-in user.
"""

from __future__ import annotations

from rest_framework.permissions import BasePermission


class LoggedIn(BasePermission):
    """Any active, logged-in user (a session or an API key of theirs). The default."""

    message = "Log in, or send an API key of your user."

    def has_permission(self, request, view) -> bool:
        user = request.user
        return bool(user and user.is_authenticated and user.is_active)


class StaffOnly(LoggedIn):
    """Staff users only: jobs, publishing and settings that affect everyone."""

    message = "Only staff users may do this."

    def has_permission(self, request, view) -> bool:
        return super().has_permission(request, view) and request.user.is_staff


class KeyManagement(LoggedIn):
    """Creating or revoking keys: a logged-in session, or a staff user's key.

    A key of a member cannot mint keys, so revoking a leaked key locks its holder out.
    """

    message = "Keys are created and revoked from a logged-in session (or with a staff key)."

    def has_permission(self, request, view) -> bool:
        if not super().has_permission(request, view):
            return False
        return request.method in ("GET", "HEAD", "OPTIONS") or (
            request.auth is None or request.user.is_staff
        )
