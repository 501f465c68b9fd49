"""Inflight's navigation: the script `streamlit run app.py` serves."""
import streamlit as st

st.set_page_config(page_title="Inflight", page_icon=":material/flight_takeoff:", layout="wide")
nav = st.navigation([
    st.Page("playground.py", title="Live playground", icon=":material/insights:", default=True),
    st.Page("kv_cache.py", title="KV cache", icon=":material/grid_view:"),
    st.Page("benchmark.py", title="Benchmark", icon=":material/bar_chart:"),
    st.Page("about.py", title="About", icon=":material/menu_book:"),
], position="top")
nav.run()
