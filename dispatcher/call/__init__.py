"""The call: the contract between the engine and a counterparty (`contract`), the public
handler contract (`handler`), the one attempt loop that runs any handler under one deadline
(`attempts`), and the pure rules for pauses and a deadline's outcome (`outcomes`). Below the pod
and the handlers: it imports neither."""
