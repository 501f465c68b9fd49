"""Placeholder landing page until the playground lands: engine status from the service."""
import streamlit as st

from engine.service import get_service

st.set_page_config(page_title="Inflight", layout="wide")
st.title("Inflight")
svc = get_service()
st.json(svc.status())
