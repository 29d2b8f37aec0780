"""The Listening test tab: the study served to raters (`service`, no Gradio), its layout (`tab`) and charts."""
