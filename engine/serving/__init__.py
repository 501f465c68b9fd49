"""Serving: the EngineService and its lanes (one worker thread per lane, local or remote), the request
handles callers hold, and the submitters that feed it."""
