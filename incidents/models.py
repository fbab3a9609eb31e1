# Incidents, their grouping and playbook executions arrive with the detection issue.
