"""The room: who may do what (roles, the presenter token), how much each participant may send, and who
has joined. Depends on nothing else in the engine."""
