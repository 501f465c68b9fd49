"""Inflight's navigation: the script `streamlit run app.py` serves."""
import streamlit as st

st.set_page_config(page_title="Inflight", page_icon="🛫", layout="wide")
nav = st.navigation([
    st.Page("playground.py", title="Live playground", icon="🎛️", default=True),
    st.Page("kv_cache.py", title="KV cache", icon="🧱"),
    st.Page("benchmark.py", title="Benchmark", icon="📊"),
    st.Page("about.py", title="About", icon="📖"),
], position="top")
nav.run()
