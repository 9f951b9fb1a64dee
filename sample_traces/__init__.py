"""Sample traces for the dashboard and the synthesizer that makes traces with planted problems."""
